//! `xfer bench` against in-process servers on loopback: plain HTTP/1.1 (two servers, round
//! robin), HTTP/1.1 and HTTP/2 over TLS, and QUIC. Each run lasts about two seconds; the
//! assertions are about accounting, never about speed.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use xfer::serve::{ServeConfig, ServerTls, Servers};

async fn start(root: &Path, tls: ServerTls) -> Servers {
    let mut cfg = ServeConfig::new(root, tls);
    cfg.http.listen = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
    match Servers::start(cfg).await {
        Ok(s) => s,
        Err(e) => panic!("cannot start servers: {e}"),
    }
}

/// Run `xfer bench <args> --json` and return its report.
async fn bench(args: Vec<String>) -> Value {
    let out = tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_xfer"))
            .arg("bench")
            .args(&args)
            .args([
                "--json",
                "--quiet",
                "--duration",
                "2",
                "--mean-size",
                "2MiB",
            ])
            .output()
    })
    .await
    .map(|r| r.map_err(|e| e.to_string()));
    let out = match out {
        Ok(Ok(o)) => o,
        other => panic!("cannot run xfer bench: {other:?}"),
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "xfer bench failed ({}): {stderr}\n{stdout}",
        out.status
    );
    match serde_json::from_str(&stdout) {
        Ok(v) => v,
        Err(e) => panic!("bench output is not JSON ({e}): {stdout}\n{stderr}"),
    }
}

fn num(v: &Value, key: &str) -> u64 {
    match v[key].as_u64() {
        Some(n) => n,
        None => panic!("{key} missing or not a count in {v}"),
    }
}

/// No errors, something moved, and every byte received is accounted for by completed
/// operations (their full sizes), cut ones, or failed ones.
fn check(report: &Value, protocol: &str) {
    assert_eq!(num(report, "errors"), 0, "{report}");
    let received = num(report, "bytes_received");
    let accounted =
        num(report, "completed_bytes") + num(report, "cut_bytes") + num(report, "errored_bytes");
    assert_eq!(received, accounted, "{report}");
    assert!(num(report, "operations") > 0, "{report}");
    assert!(received > 0, "{report}");
    // A lane is cut at most once: its last operation, unless it finished just in time.
    assert!(
        num(report, "cut_at_deadline") <= num(report, "concurrency"),
        "{report}"
    );
    let requests: u64 = report["servers"]
        .as_array()
        .map(|s| s.iter().map(|s| num(s, "requests")).sum())
        .unwrap_or(0);
    assert_eq!(
        requests,
        num(report, "operations") + num(report, "cut_at_deadline"),
        "{report}"
    );
    let protocols = report["protocols"].to_string();
    assert!(protocols.contains(protocol), "{protocols} vs {protocol}");
    assert!(
        report["ttfb_ms"]["samples"].as_u64().unwrap_or(0) > 0,
        "{report}"
    );
    assert!(report["cpu"]["s_per_gib"].is_number(), "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_counts_every_byte_over_each_transport() {
    let dir = match tempfile::tempdir() {
        Ok(d) => d,
        Err(e) => panic!("tempdir: {e}"),
    };
    let root = dir.path().join("root");
    std::fs::create_dir_all(&root).ok();
    let plain_a = start(&root, ServerTls::Plain).await;
    let plain_b = start(&root, ServerTls::Plain).await;
    let tls = start(
        &root,
        ServerTls::SelfSigned {
            dir: dir.path().join("cert"),
            names: vec!["127.0.0.1".into(), "localhost".into()],
        },
    )
    .await;
    let ca: PathBuf = match &tls.self_signed {
        Some(s) => s.cert_path.clone(),
        None => panic!("no certificate generated"),
    };
    let ca = ca.display().to_string();
    let quic = match tls.quic_base() {
        Some(q) => q,
        None => panic!("QUIC did not start"),
    };

    // Two plain servers, digests off: requests alternate between them.
    let r = bench(vec![
        plain_a.http_base(),
        plain_b.http_base(),
        "--protocol".into(),
        "http1".into(),
        "--no-verify".into(),
        "--concurrency".into(),
        "4".into(),
    ])
    .await;
    check(&r, "http/1.1");
    assert_eq!(r["verify"], Value::Bool(false));
    assert!(r["cpu"]["sha256_paired"].is_null(), "nothing hashed: {r}");
    let per_server: Vec<u64> = r["servers"]
        .as_array()
        .map(|s| s.iter().map(|s| num(s, "requests")).collect())
        .unwrap_or_default();
    assert_eq!(per_server.len(), 2, "{r}");
    assert!(
        per_server[0].abs_diff(per_server[1]) <= 1,
        "round robin: {per_server:?}"
    );

    for protocol in ["http1", "http2"] {
        let r = bench(vec![
            tls.http_base(),
            "--protocol".into(),
            protocol.into(),
            "--ca-cert".into(),
            ca.clone(),
        ])
        .await;
        check(
            &r,
            if protocol == "http1" {
                "http/1.1"
            } else {
                "h2"
            },
        );
        assert_eq!(r["verify"], Value::Bool(true));
        let paired = r["cpu"]["sha256_paired"].as_f64().unwrap_or(-1.0);
        assert!(
            (0.0..=1.0).contains(&paired),
            "a share of what was hashed: {r}"
        );
    }

    let r = bench(vec![quic, "--ca-cert".into(), ca.clone()]).await;
    check(&r, "quic");

    plain_a.shutdown().await;
    plain_b.shutdown().await;
    tls.shutdown().await;
}

#[test]
fn help_states_the_deadline_rule() {
    let out = Command::new(env!("CARGO_BIN_EXE_xfer"))
        .args(["bench", "--help"])
        .output();
    let text = match out {
        Ok(o) => String::from_utf8_lossy(&o.stdout).into_owned(),
        Err(e) => panic!("cannot run xfer: {e}"),
    };
    assert!(text.contains("cut_at_deadline"), "{text}");
    assert!(text.contains("not counted as completed"), "{text}");
}

#[test]
fn a_server_that_is_not_there_is_an_error() {
    // Port 1 on loopback: nothing listens there, the connection is refused at once.
    let out = Command::new(env!("CARGO_BIN_EXE_xfer"))
        .args(["bench", "http://127.0.0.1:1", "--duration", "1", "--quiet"])
        .output();
    match out {
        Ok(o) => assert!(!o.status.success(), "{o:?}"),
        Err(e) => panic!("cannot run xfer: {e}"),
    }
}

#[test]
fn duration_takes_the_duration_grammar() {
    let run = |d: &str| match Command::new(env!("CARGO_BIN_EXE_xfer"))
        .args(["bench", "http://127.0.0.1:1", "--quiet"])
        .arg(format!("--duration={d}"))
        .output()
    {
        Ok(o) => o,
        Err(e) => panic!("cannot run xfer: {e}"),
    };
    // Accepted flags get as far as the (refused) connection.
    for good in ["5s", "250ms", "1m", "1.5s", "3"] {
        let o = run(good);
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(!stderr.contains("--duration"), "{good}: {stderr}");
    }
    for bad in ["5 parsecs", "-1", "1e999", "NaN", "0s"] {
        let o = run(bad);
        assert!(!o.status.success(), "{bad}: {o:?}");
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(stderr.contains("duration"), "{bad}: {stderr}");
    }
}

#[test]
fn floor_reports_every_primitive_and_the_sums_it_is_read_against() {
    let out = match Command::new(env!("CARGO_BIN_EXE_xfer"))
        .args(["bench", "--floor", "--duration", "70ms", "--json"])
        .output()
    {
        Ok(o) => o,
        Err(e) => panic!("cannot run xfer: {e}"),
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    let v: Value = match serde_json::from_str(&stdout) {
        Ok(v) => v,
        Err(e) => panic!("floor output is not JSON ({e}): {stdout}"),
    };
    let suite = v["negotiated_suite"].as_str().unwrap_or_default();
    assert!(suite.starts_with("TLS13_"), "{v}");
    let keys: Vec<&str> = v["rows"]
        .as_array()
        .map(|rows| rows.iter().filter_map(|r| r["key"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(
        keys,
        [
            "seal",
            "open",
            "chacha20_seal",
            "chacha20_open",
            "sha256",
            "sha256_pair",
            "adler32",
            "copy"
        ]
    );
    let per_gib = |k: &str| {
        v["rows"]
            .as_array()
            .and_then(|rows| rows.iter().find(|r| r["key"] == k))
            .and_then(|r| r["cpu_seconds_per_gib"].as_f64())
            .unwrap_or(f64::NAN)
    };
    let field = |k: &str| v[k].as_f64().unwrap_or(f64::NAN);
    let close = |a: f64, b: f64| (a - b).abs() < 1e-9 * b.max(1.0);
    assert!(
        close(field("server_floor"), per_gib("seal") + per_gib("copy")),
        "{v}"
    );
    assert!(
        close(
            field("client_floor_sha256"),
            per_gib("open") + per_gib("copy") + per_gib("sha256")
        ),
        "{v}"
    );
}

#[test]
fn floor_measures_no_server() {
    let out = match Command::new(env!("CARGO_BIN_EXE_xfer"))
        .args(["bench", "--floor", "http://127.0.0.1:1"])
        .output()
    {
        Ok(o) => o,
        Err(e) => panic!("cannot run xfer: {e}"),
    };
    assert!(!out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--floor"), "{stderr}");
}

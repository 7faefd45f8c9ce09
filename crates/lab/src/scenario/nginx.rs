//! nginx in the server namespace for tree scenarios: the peers' server. One process
//! (`master_process off`), TLS with `xfer serve`'s self-signed certificate, HTTP/1.1 and
//! HTTP/2 offered by ALPN, the tree under `/html/` (HTML autoindex, what rclone's HTTP remote
//! reads) and `/json/` (`autoindex_format json`, what xfer reads from nginx).

use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use super::process::stop;
use super::ScenarioError;

/// A running nginx; stopped on drop.
pub struct Nginx {
    child: Child,
}

impl Drop for Nginx {
    fn drop(&mut self) {
        stop(&mut self.child, Duration::from_secs(3));
    }
}

impl Nginx {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

/// The configuration for `tree` served at `listen` with the certificate in `cert_dir`.
pub fn config(dir: &Path, tree: &Path, cert_dir: &Path, listen: &str) -> String {
    let d = dir.display();
    let t = tree.display();
    let c = cert_dir.display();
    format!(
        "daemon off; master_process off; worker_processes 1; pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{ worker_connections 4096; }}
http {{
  access_log off; sendfile on; tcp_nopush on;
  client_body_temp_path {d}; proxy_temp_path {d}; fastcgi_temp_path {d};
  uwsgi_temp_path {d}; scgi_temp_path {d};
  default_type application/octet-stream;
  keepalive_requests 100000;
  server {{
    listen {listen} ssl http2;
    ssl_certificate {c}/cert.pem; ssl_certificate_key {c}/key.pem;
    location /html/ {{ alias {t}/; autoindex on; }}
    location /json/ {{ alias {t}/; autoindex on; autoindex_format json; }}
  }}
}}
"
    )
}

/// Starts nginx with `command` (`nginx` in the server namespace), its configuration and logs
/// in `dir`, and waits until it has written its pid file (after binding its socket).
pub fn start(
    mut command: std::process::Command,
    dir: &Path,
    tree: &Path,
    cert_dir: &Path,
    listen: &str,
) -> Result<Nginx, ScenarioError> {
    std::fs::create_dir_all(dir).map_err(|source| ScenarioError::io("creating", dir, source))?;
    let conf = dir.join("nginx.conf");
    std::fs::write(&conf, config(dir, tree, cert_dir, listen))
        .map_err(|source| ScenarioError::io("writing", &conf, source))?;
    let pid_file = dir.join("nginx.pid");
    let _ = std::fs::remove_file(&pid_file);
    command.arg("-p").arg(dir).arg("-c").arg(&conf);
    let mut child = super::runner::spawn_logged(command, None, &dir.join("stderr.log"), "nginx")?;
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        if pid_file.exists() {
            return Ok(Nginx { child });
        }
        let log = || {
            let a = std::fs::read_to_string(dir.join("stderr.log")).unwrap_or_default();
            let b = std::fs::read_to_string(dir.join("error.log")).unwrap_or_default();
            format!("{}{}", a.trim(), b.trim())
        };
        if let Ok(Some(status)) = child.try_wait() {
            return Err(ScenarioError::ServerStart {
                reason: format!("nginx exited ({status}): {}", log()),
            });
        }
        if Instant::now() > until {
            stop(&mut child, Duration::from_secs(1));
            return Err(ScenarioError::ServerStart {
                reason: format!("nginx not ready after 20 s: {}", log()),
            });
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Where nginx keeps its files for a run under `work_dir`.
pub fn dir_under(work_dir: &Path) -> PathBuf {
    work_dir.join("nginx")
}

//! The JWT decision table (crates/service/tests/token_table.rs) over real HTTPS against xfer
//! and against XRootD with its SciTokens plugin (scitokens-cpp), case by case, with the same
//! two loopback issuers serving discovery and JWKS. The verdicts (allowed, or refused with a
//! 401 or 403) must agree, except for the differences listed in [`KNOWN_DIFFERENCES`], each
//! asserted as it is so that a change on either side fails the test. docs/tokens.md explains
//! each difference with the WLCG Common JWT Profile section it concerns.
//!
//! XRootD runs as its own user with `ofs.authlib ++ libXrdAccSciTokens.so` and an empty
//! authorisation database, so a request its token does not authorise is refused. Its plugin
//! fetches keys with libcurl, which trusts only /etc/ssl/certs: XRootD is started in a mount
//! namespace where the issuers' certificates are mounted there. That needs root; under
//! `CI=true` (where the tests run as root) nothing is skipped.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::{require_program, BoxError, TestResult};
use crate::token_table::{Case, Issuers, Keys, Op, ANY, HOST, ORIGIN, TREE};
use crate::tokens::{start_issuer, uploads_with_access};
use crate::wlcg::{hashed_ca_dir, record_version, start_xrootd_with, Xrootd, XrootdExtra};

use Verdict::{Allowed, Crashed, Refused};

/// How a server answered a case: only the verdict is compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Allowed,
    Refused,
    /// The server closed the connection without an answer: XRootD's process died.
    Crashed,
}

fn verdict(code: u16) -> Option<Verdict> {
    match code {
        200..=299 => Some(Verdict::Allowed),
        401 | 403 => Some(Verdict::Refused),
        0 => Some(Verdict::Crashed),
        _ => None,
    }
}

/// Cases where XRootD 5.5's plugin decides otherwise than xfer: (case, xfer, XRootD).
/// docs/tokens.md, "Compared with XRootD's SciTokens plugin", gives the reasons.
const KNOWN_DIFFERENCES: &[(&str, Verdict, Verdict)] = &[
    ("expired within the leeway", Allowed, Refused),
    ("oversized", Refused, Allowed),
    ("scope without a path", Refused, Allowed),
    ("scope /a does not cover /ab", Refused, Allowed),
    ("scope with ..", Refused, Crashed),
    ("create also reads", Allowed, Refused),
    ("modify: delete", Allowed, Refused),
    ("wlcg.ver 1.2", Allowed, Refused),
    ("SciTokens without nbf", Allowed, Refused),
    ("SciTokens scope names in a WLCG token", Refused, Allowed),
    ("group fallback", Allowed, Refused),
    ("static token beside issuers", Allowed, Refused),
    ("anonymous read", Allowed, Refused),
];

/// The status `url` answers `case`, through curl trusting `ca`.
async fn ask(
    curl: &Path,
    ca: &Path,
    base: &str,
    case: &Case,
    body: &Path,
) -> Result<u16, BoxError> {
    let mut cmd = Command::new(curl);
    cmd.args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "--cacert"])
        .arg(ca);
    if !case.token.is_empty() {
        cmd.arg("-H")
            .arg(format!("Authorization: Bearer {}", case.token));
    }
    match case.op {
        Op::Get => {}
        Op::Put => {
            cmd.arg("-T").arg(body);
        }
        Op::Delete => {
            cmd.args(["-X", "DELETE"]);
        }
        Op::Mkcol => {
            cmd.args(["-X", "MKCOL"]);
        }
        Op::Move(to) => {
            cmd.args(["-X", "MOVE", "-H"])
                .arg(format!("Destination: {base}{to}"));
        }
    }
    cmd.arg(format!("{base}{}", case.path));
    let out = tokio::task::spawn_blocking(move || cmd.output()).await??;
    let code = String::from_utf8_lossy(&out.stdout);
    code.trim()
        .parse()
        .map_err(|e| format!("{}: curl printed {code:?}: {e}", case.name).into())
}

fn write_tree(root: &Path) -> Result<(), BoxError> {
    for d in TREE {
        std::fs::create_dir_all(root.join(d))?;
        std::fs::write(root.join(d).join("f"), b"data")?;
    }
    Ok(())
}

/// XRootD's token configuration for the same issuers and audiences as xfer's access file.
/// XRootD has one audience list for all issuers.
fn scitokens_cfg(issuers: &Issuers) -> String {
    format!(
        "[Global]\naudience = {ANY}, {HOST}, {ORIGIN}\n\n\
         [Issuer wlcg]\nissuer = {}\nbase_path = /atlas\ndefault_user = xrootd\n\n\
         [Issuer sci]\nissuer = {}\nbase_path = /\ndefault_user = xrootd\n",
        issuers.wlcg, issuers.sci
    )
}

/// xrootd, openssl and XRootD's token plugin, as root; or `None` to skip (never under
/// `CI=true`).
pub(crate) fn token_xrootd_tools() -> Option<(PathBuf, PathBuf)> {
    let (Some(bin), Some(openssl), Some(_plugin)) = (
        require_program("xrootd", &["/usr/bin/xrootd"], "xrootd-server"),
        require_program("openssl", &["/usr/bin/openssl"], "openssl"),
        require_program(
            "libXrdAccSciTokens-5.so",
            &["/usr/lib/x86_64-linux-gnu/libXrdAccSciTokens-5.so"],
            "xrootd-scitokens-plugins",
        ),
    ) else {
        return None;
    };
    // XRootD's plugin trusts the test issuers only in a mount namespace, which needs root.
    if !xfer_test_support::gate::require_root(
        "xrootd_tokens (a mount namespace for XRootD's trust store)",
    ) {
        return None;
    }
    Some((bin, openssl))
}

/// XRootD over HTTPS with its SciTokens plugin and HTTP-TPC, in `dir`/xrootd (whatever is
/// under `data` there already is served), and what it takes to start it again.
pub(crate) struct TokenXrootd {
    pub(crate) server: Xrootd,
    bin: PathBuf,
    dir: PathBuf,
    cert: PathBuf,
    key: PathBuf,
    capath: PathBuf,
    extra: XrootdExtra,
}

impl TokenXrootd {
    /// `tls` is XRootD's certificate and key (the certificate is also the CA its TPC client
    /// trusts); `trusted` are the PEM certificates its plugin trusts for the issuers.
    pub(crate) fn start(
        bin: &Path,
        openssl: &Path,
        dir: &Path,
        tls: (&Path, &Path),
        trusted: &[&Path],
        scitokens_cfg: String,
    ) -> Result<Self, BoxError> {
        let (cert, key) = tls;
        let capath = hashed_ca_dir(openssl, cert, dir)?;
        let xrd = dir.join("xrootd");
        // Its key cache in its own directory; the issuers' certificates as its system
        // trust store.
        std::fs::create_dir_all(xrd.join("cache"))?;
        let trust = xrd.join("trust");
        std::fs::create_dir_all(&trust)?;
        let mut bundle = String::new();
        for (i, pem) in trusted.iter().chain([&cert]).enumerate() {
            let text = std::fs::read_to_string(pem)?;
            std::fs::write(trust.join(format!("ca-{i}.pem")), &text)?;
            bundle.push_str(&text);
        }
        std::fs::write(trust.join("ca-certificates.crt"), &bundle)?;
        let out = Command::new(openssl).arg("rehash").arg(&trust).output()?;
        if !out.status.success() {
            return Err(format!("openssl rehash: {}", String::from_utf8_lossy(&out.stderr)).into());
        }
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&trust, std::fs::Permissions::from_mode(0o755))?;
        }
        let extra = XrootdExtra {
            conf: "ofs.authorize 1\nacc.authdb @XRD@/authdb\n\
                   ofs.authlib ++ libXrdAccSciTokens.so config=@XRD@/scitokens.cfg\n\
                   http.header2cgi Authorization authz\nscitokens.trace all\n"
                .into(),
            files: vec![
                ("authdb".into(), String::new()),
                ("scitokens.cfg".into(), scitokens_cfg),
            ],
            env: vec![("XDG_CACHE_HOME".into(), "@XRD@/cache".into())],
            system_trust: Some(trust),
        };
        let server = start_xrootd_with(bin, dir, cert, key, &capath, &extra)?;
        Ok(Self {
            server,
            bin: bin.to_owned(),
            dir: dir.to_owned(),
            cert: cert.to_owned(),
            key: key.to_owned(),
            capath,
            extra,
        })
    }

    /// Start it again (on new ports) after its process ended; its files stay.
    pub(crate) fn restart(&mut self) -> Result<(), BoxError> {
        self.server = start_xrootd_with(
            &self.bin,
            &self.dir,
            &self.cert,
            &self.key,
            &self.capath,
            &self.extra,
        )?;
        Ok(())
    }

    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("xrootd/xrootd.log")).unwrap_or_default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_decision_table_against_xrootd_and_xfer() -> TestResult {
    let (Some((bin, openssl)), Some(curl)) = (
        token_xrootd_tools(),
        require_program("curl", &["/usr/bin/curl"], "curl"),
    ) else {
        return Ok(());
    };
    record_version(&bin, &["-v"]).await?;

    let issuer_dir = tempfile::tempdir()?;
    let (wlcg_dir, sci_dir) = (
        issuer_dir.path().join("wlcg"),
        issuer_dir.path().join("sci"),
    );
    std::fs::create_dir_all(&wlcg_dir)?;
    std::fs::create_dir_all(&sci_dir)?;
    let (wlcg_url, wlcg_ca, wlcg_state) = start_issuer(&wlcg_dir).await?;
    let (sci_url, sci_ca, sci_state) = start_issuer(&sci_dir).await?;
    let keys = Keys::new();
    *wlcg_state.jwks.lock().expect("jwks lock") = keys.jwks(&["ec1", "rsa1"]);
    *sci_state.jwks.lock().expect("jwks lock") = keys.jwks(&["ec2"]);
    let issuers = Issuers {
        wlcg: wlcg_url,
        sci: sci_url,
    };

    let access = issuers.access_file(Some((
        &wlcg_ca.display().to_string(),
        &sci_ca.display().to_string(),
    )));
    let fx = uploads_with_access(&access).await?;
    write_tree(&fx.root())?;

    // XRootD: the same tree.
    let ca = fx.ca_cert().ok_or("the fixture has no CA")?;
    let key = ca.with_file_name("key.pem");
    let xrd = fx.dir.path().join("xrootd");
    write_tree(&xrd.join("data"))?;
    let mut xrootd = TokenXrootd::start(
        &bin,
        &openssl,
        fx.dir.path(),
        (&ca, &key),
        &[&wlcg_ca, &sci_ca],
        scitokens_cfg(&issuers),
    )?;
    let body = fx.dir.path().join("body.bin");
    std::fs::write(&body, b"new")?;
    let xfer_base = fx.url("");
    let mut xrootd_base = xrootd.server.url("");
    let cases = issuers.cases(&keys);
    assert!(cases.len() >= 30);
    let mut rows = Vec::new();
    for case in &cases {
        let at_xfer = ask(&curl, &ca, &xfer_base, case, &body).await?;
        let at_xrootd = ask(&curl, &ca, &xrootd_base, case, &body).await?;
        if at_xrootd == 0 {
            // The rest of the table needs a live XRootD; its tree stays as it was.
            xrootd.restart()?;
            xrootd_base = xrootd.server.url("");
        }
        println!(
            "{:<45} {:?} {:<7} xfer {at_xfer}  xrootd {at_xrootd}",
            case.name, case.op, case.path
        );
        // A refused request leaves nothing behind on either side.
        let made = match case.op {
            Op::Put | Op::Mkcol => Some(case.path),
            Op::Move(to) => Some(to),
            Op::Get | Op::Delete => None,
        };
        if let Some(made) = made.filter(|p| p.contains("/new-")) {
            for (root, code) in [(fx.root(), at_xfer), (xrd.join("data"), at_xrootd)] {
                if verdict(code) == Some(Refused) {
                    assert!(
                        !root.join(&made[1..]).exists(),
                        "{}: refused with {code}, yet {made} exists under {}",
                        case.name,
                        root.display()
                    );
                }
            }
        }
        rows.push((case.name, case.want, at_xfer, at_xrootd));
    }
    let mut failures = Vec::new();
    for (name, want, at_xfer, at_xrootd) in rows {
        if at_xfer != want {
            failures.push(format!(
                "{name}: xfer answered {at_xfer}, the table says {want}"
            ));
        }
        // RFC 6750 §3.1: an invalid token is a 401; XRootD answers every refusal with 403.
        if at_xfer == 401 && verdict(at_xrootd) == Some(Refused) && at_xrootd != 403 {
            failures.push(format!(
                "{name}: XRootD refused with {at_xrootd}, not its usual 403"
            ));
        }
        let (x, r) = (verdict(at_xfer), verdict(at_xrootd));
        match KNOWN_DIFFERENCES.iter().find(|(n, ..)| *n == name) {
            Some(&(_, dx, dr)) => {
                if (x, r) != (Some(dx), Some(dr)) {
                    failures.push(format!(
                        "{name}: a listed difference changed: xfer {at_xfer}, XRootD {at_xrootd}; listed {dx:?} / {dr:?}"
                    ));
                }
            }
            None => {
                if x.is_none() || x != r {
                    failures.push(format!("{name}: xfer {at_xfer}, XRootD {at_xrootd}"));
                }
            }
        }
    }
    for (name, ..) in KNOWN_DIFFERENCES {
        assert!(
            cases.iter().any(|c| c.name == *name),
            "a listed difference names no case: {name}"
        );
    }
    if !failures.is_empty() {
        let log = xrootd.log();
        let tail: Vec<&str> = log.lines().rev().take(40).collect();
        eprintln!(
            "XRootD's log ends:\n{}",
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        );
    }
    assert!(
        failures.is_empty(),
        "verdicts differ:\n{}",
        failures.join("\n")
    );
    fx.shutdown().await;
    Ok(())
}

//! Run xfer's servers: HTTP/1.1 + HTTP/2 on TCP and, with TLS, xfer/1 over QUIC on the same
//! port number over UDP, all serving one directory: reads for everyone the access rules let
//! in, uploads and third-party copies only where they grant write scope.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use xfer_common::tls::{
    self, CertOrigin, ReloadableCert, ReloadableClientVerifier, SelfSigned, TlsError,
};
use xfer_common::FaultInjection;
use xfer_http::server::tcp_resume::TcpResumeStatus;
use xfer_http::server::{HttpServer, ServerConfig as HttpServerConfig};
use xfer_quic::{CarefulResume, QuicServer, QuicServerConfig, QuicTuning};
use xfer_service::{
    AccessControl, AccessFileError, AccessLogTarget, KeyTimes, Service, ServiceConfig, TpcConfig,
    UploadConfig,
};

use crate::metrics_endpoint::MetricsEndpoint;
use crate::ClientConfig;

pub use live_tls::LiveTls;
pub use xfer_http::server::ServerConfig as HttpConfig;

mod live_tls;

/// Where the server's certificate comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerTls {
    /// Plain TCP: HTTP/1.1 and h2c. QUIC always needs TLS, so it is off.
    Plain,
    /// PEM files.
    Files { cert: PathBuf, key: PathBuf },
    /// Use the certificate and key in `dir` if they are usable for `names` now; otherwise
    /// generate a certificate for `names` and write it (and its key) there, for clients to
    /// trust with `--ca-cert <dir>/cert.pem`. Reusing it keeps clients (and transfers running
    /// across a restart) working; [`ServeConfig::renew_self_signed`] forces a new one.
    /// [`tls::default_cert_names`] gives the names `xfer serve` uses.
    SelfSigned { dir: PathBuf, names: Vec<String> },
}

/// Everything `xfer serve` needs.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// HTTP server settings; its `root` and `listen` are the served directory and TCP address.
    /// What they say of the request core (root, streaming and memory budget, digests,
    /// checksums on send, mirrors) describes the one core every protocol shares.
    pub http: HttpServerConfig,
    pub tls: ServerTls,
    /// Serve QUIC on UDP at the same address as TCP (needs TLS). Default on.
    pub quic: bool,
    /// A different UDP address for QUIC.
    pub quic_listen: Option<SocketAddr>,
    pub quic_tuning: QuicTuning,
    /// Careful Resume of the QUIC server (saved path state per client).
    pub quic_resume: CarefulResume,
    /// With [`ServerTls::SelfSigned`]: generate a new certificate even if the one in the
    /// directory is usable. Default off.
    pub renew_self_signed: bool,
    /// Test hook: corrupt bytes at an offset in the first responses that cover it.
    pub dangerous_fault: Option<Arc<FaultInjection>>,
    /// Tokens and client certificates with their scopes (`xfer_service::access`); `None`:
    /// no credentials are known, so nothing can be written.
    pub access_file: Option<PathBuf>,
    /// Serve reads without credentials. Default on.
    pub anonymous_read: bool,
    /// How long the keys of the access file's JWT issuers are cached (docs/tokens.md).
    pub issuer_keys: KeyTimes,
    /// Ask clients for a certificate signed by a CA in this PEM file, or in this OpenSSL
    /// hashed directory (whose CRLs are honoured); its subjectAltName names map to scopes in
    /// the access file. Needs TLS.
    pub client_ca: Option<PathBuf>,
    /// Accept uploads from callers the access file gives write access. Default off.
    pub uploads: Option<UploadConfig>,
    /// HTTP third-party copy (`COPY`, docs/tpc.md): limits and marker interval. Default on
    /// with [`TpcConfig::default`]; a pull also needs `uploads`, a push a known caller.
    pub tpc: Option<TpcConfig>,
    /// How third-party copies reach remotes: which CAs to trust (default the Mozilla roots),
    /// TCP tuning, protocol.
    pub tpc_client: ClientConfig,
    /// Serve Prometheus metrics at `http://ADDR/metrics` (docs/monitoring.md). Default off.
    pub metrics_listen: Option<SocketAddr>,
    /// Write one JSON line per finished request here (docs/monitoring.md). Default off.
    pub access_log: Option<AccessLogTarget>,
}

impl ServeConfig {
    /// Serve `root` with the defaults: `[::]:8443`, QUIC beside TCP, TLS as given.
    pub fn new(root: impl Into<PathBuf>, tls: ServerTls) -> Self {
        Self {
            http: HttpServerConfig::new(root),
            tls,
            quic: true,
            quic_listen: None,
            quic_tuning: QuicTuning::for_server(),
            quic_resume: CarefulResume::default(),
            renew_self_signed: false,
            dangerous_fault: None,
            access_file: None,
            anonymous_read: true,
            issuer_keys: KeyTimes::default(),
            client_ca: None,
            uploads: None,
            tpc: Some(TpcConfig::default()),
            tpc_client: ClientConfig::default(),
            metrics_listen: None,
            access_log: None,
        }
    }
}

/// Why the servers could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Tls(#[from] TlsError),
    #[error(transparent)]
    Http(#[from] xfer_http::server::ServerError),
    #[error(transparent)]
    Quic(#[from] xfer_quic::ServerError),
    #[error(transparent)]
    Access(#[from] AccessFileError),
    /// The metrics listener or the access log could not be opened.
    #[error(transparent)]
    Monitoring(#[from] std::io::Error),
}

/// Running servers. Dropping this does not stop them; call [`Servers::shutdown`].
pub struct Servers {
    /// The TCP address bound (HTTP).
    pub http_addr: SocketAddr,
    /// The UDP address bound (QUIC), when QUIC runs.
    pub quic_addr: Option<SocketAddr>,
    /// Whether HTTP runs over TLS.
    pub tls: bool,
    /// The self-signed certificate in use, with [`ServerTls::SelfSigned`].
    pub self_signed: Option<SelfSigned>,
    /// Whether that certificate was reused or generated (and why).
    pub cert_origin: Option<CertOrigin>,
    /// Whether HTTP connections start from their client's saved path (TCP resume), or why not.
    pub tcp_resume: TcpResumeStatus,
    /// The certificate HTTP and QUIC present and the client CAs, reloaded on SIGHUP (or by
    /// [`LiveTls::reload`]); `None` without TLS.
    pub live_tls: Option<LiveTls>,
    /// The TCP address of the metrics listener, when it runs.
    pub metrics_addr: Option<SocketAddr>,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl Servers {
    /// Bind and start serving in the background.
    pub async fn start(cfg: ServeConfig) -> Result<Self, ServeError> {
        let mut self_signed = None;
        let mut cert_origin = None;
        // The TLS key is the secret that survives a restart: QUIC's stateless-reset key is
        // derived from it, so clients of a restarted server learn at once that their
        // connections are gone.
        let (cert_file, key_file) = match &cfg.tls {
            ServerTls::Plain => (None, None),
            ServerTls::Files { cert, key } => (Some(cert.clone()), Some(key.clone())),
            ServerTls::SelfSigned { dir, names } => {
                let (made, origin) =
                    tls::reuse_or_generate_self_signed(names, dir, cfg.renew_self_signed)?;
                let paths = (Some(made.cert_path.clone()), Some(made.key_path.clone()));
                self_signed = Some(made);
                cert_origin = Some(origin);
                paths
            }
        };
        let live_tls = match (&cert_file, &key_file) {
            (Some(cert), Some(key)) => Some(LiveTls {
                cert: Arc::new(ReloadableCert::load(cert, key)?),
                clients: match &cfg.client_ca {
                    Some(ca) => Some(Arc::new(ReloadableClientVerifier::load(ca)?)),
                    None => None,
                },
            }),
            _ => None,
        };
        let server_tls = match &live_tls {
            Some(live) => Some(Arc::new(tls::server_config_reloadable(
                Arc::clone(&live.cert),
                &[],
                live.clients.clone(),
            )?)),
            None => None,
        };
        // Opened before anything listens, so that a bad path stops the start.
        let metrics = match cfg.metrics_listen {
            Some(addr) => Some(MetricsEndpoint::bind(addr).await?),
            None => None,
        };
        let metrics_addr = metrics.as_ref().map(|m| m.local_addr()).transpose()?;
        if let Some(target) = &cfg.access_log {
            xfer_service::access_log::start(target)?;
        }
        let access = Arc::new(match &cfg.access_file {
            Some(path) => AccessControl::from_file(path, cfg.anonymous_read)?.with_key_source(
                Arc::new(crate::issuer_keys::IssuerKeyFetcher),
                cfg.issuer_keys,
            ),
            None => AccessControl::anonymous(cfg.anonymous_read),
        });
        access.spawn_reloader();
        if cfg.uploads.is_some() && !access.policy().allows_writes() {
            tracing::warn!("uploads are on but no token or certificate has write access: every PUT will be refused");
        }
        let service = Arc::new(Service::new(service_config(&cfg, access)?));
        let core = service.config();
        if let Some(up) = &core.uploads {
            core.upload_state.spawn_sweeper(up.expiry);
        }
        // Staging files are written by uploads and by third-party pulls alike.
        if core.uploads.is_some() || core.tpc.is_some() {
            let expiry = core.uploads.clone().unwrap_or_default().expiry;
            xfer_service::spawn_stale_staging_sweeper(core.root.clone(), expiry);
        }
        xfer_common::metrics::global().watch_memory_budget(core.stream.budget.clone());
        xfer_service::status_page::spawn_sampler();
        // Both senders measure the same paths: what HTTP learns starts QUIC's connections.
        let path_share = xfer_common::path_share::PathShare::default();
        let mut http_cfg = cfg.http.clone();
        http_cfg.path_share = path_share.clone();
        http_cfg.tls = server_tls.clone();
        if cfg.client_ca.is_some() {
            // A certificate-authenticated caller is known only once the handshake completes.
            http_cfg.max_early_data_size = 0;
        }
        let http = HttpServer::bind_with(http_cfg, Arc::clone(&service)).await?;
        let http_addr = http.local_addr();
        let tcp_resume = http.tcp_resume().clone();
        let (stop, stop_rx) = watch::channel(false);
        let mut tasks = Vec::new();
        let mut quic_addr = None;
        if let (true, Some(tls)) = (cfg.quic, server_tls.clone()) {
            let listen = cfg.quic_listen.unwrap_or(http_addr);
            let mut qc = QuicServerConfig::with_service(Arc::clone(&service).into(), listen, tls);
            qc.tuning = cfg.quic_tuning.clone();
            qc.careful_resume = cfg.quic_resume.clone();
            qc.path_share = path_share;
            // One stall timeout, one admission policy and one drain deadline for every
            // protocol.
            qc.stall_timeout = cfg.http.stall_timeout;
            qc.max_connections = cfg.http.max_connections;
            qc.max_connections_per_address = cfg.http.max_connections_per_address;
            qc.shutdown_grace = cfg.http.shutdown_grace;
            qc.stateless_reset_key = match key_file.as_deref().map(std::fs::read) {
                Some(Ok(key)) => Some(xfer_quic::server::reset_key_from_secret(&key)),
                Some(Err(e)) => {
                    tracing::warn!(error = %e, "cannot read the TLS key again: QUIC clients of a restarted server wait out their idle timeout");
                    None
                }
                None => None,
            };
            // A certificate-authenticated caller is known only once the handshake completes.
            qc.early_data = cfg.client_ca.is_none();
            let quic = QuicServer::bind(qc).await?;
            quic_addr = Some(quic.local_addr());
            let rx = stop_rx.clone();
            tasks.push(tokio::spawn(async move { quic.serve(stopped(rx)).await }));
        }
        let rx = stop_rx.clone();
        tasks.push(tokio::spawn(async move { http.serve(stopped(rx)).await }));
        if let Some(live) = live_tls.clone() {
            // Installed before `start` returns: a SIGHUP that found no handler would end the
            // process.
            match signal(SignalKind::hangup()) {
                Ok(hup) => tasks.push(tokio::spawn(
                    live.reload_on_hangup(hup, stopped(stop_rx.clone())),
                )),
                Err(e) => tracing::warn!(
                    error = %e,
                    "no SIGHUP handler: the TLS certificate is not reloaded"
                ),
            }
        }
        if let Some(m) = metrics {
            tasks.push(tokio::spawn(m.serve(stop_rx.clone())));
        }
        Ok(Self {
            http_addr,
            quic_addr,
            tls: server_tls.is_some(),
            self_signed,
            cert_origin,
            tcp_resume,
            live_tls,
            metrics_addr,
            stop,
            tasks,
        })
    }

    /// `https://addr` or `http://addr`, for building URLs.
    pub fn http_base(&self) -> String {
        format!(
            "{}://{}",
            if self.tls { "https" } else { "http" },
            self.http_addr
        )
    }

    /// `quic://addr`, when QUIC runs.
    pub fn quic_base(&self) -> Option<String> {
        self.quic_addr.map(|a| format!("quic://{a}"))
    }

    /// Stop accepting connections and requests, let responses in flight finish (up to
    /// `http.shutdown_grace`, on every protocol), then close.
    pub async fn shutdown(mut self) {
        let _ = self.stop.send(true);
        for t in self.tasks.drain(..) {
            let _ = t.await;
        }
    }

    /// Serve until the servers stop by themselves (they do not, unless they fail).
    pub async fn wait(mut self) {
        for t in self.tasks.drain(..) {
            let _ = t.await;
        }
    }
}

/// The one request core of `xfer serve`, described by the HTTP settings (root, streaming,
/// digests, uploads) and the serve-wide ones (access rules, third-party copy, the test fault).
fn service_config(
    cfg: &ServeConfig,
    access: Arc<AccessControl>,
) -> Result<ServiceConfig, ServeError> {
    let mut core = cfg.http.service_config()?;
    core.access = access;
    core.uploads = cfg.uploads.clone();
    core.tpc = cfg
        .tpc
        .clone()
        .map(|t| crate::tpc::engine_tpc(cfg.tpc_client.clone(), t));
    if cfg.dangerous_fault.is_some() {
        core.dangerous_fault = cfg.dangerous_fault.clone();
    }
    Ok(core)
}

async fn stopped(mut rx: watch::Receiver<bool>) {
    while !*rx.borrow() {
        if rx.changed().await.is_err() {
            return;
        }
    }
}

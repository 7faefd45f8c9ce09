//! The engine behind third-party copy: [`EngineCopyRunner`] implements the request core's
//! [`CopyRunner`] with xfer's own client, so a `COPY` runs exactly what `xfer get` and
//! `xfer put` run.
//!
//! - A pull is a [`Download`]: parallel lanes, per-chunk SHA-256 checked against the remote's
//!   `Content-Digest` trailers when it is an xfer server, the whole file against its
//!   `Repr-Digest`; plain ranges from any other HTTP server (nginx, XRootD). It writes the
//!   staging file the core named; the core renames it into place.
//! - A push asks the remote first (`OPTIONS`): an xfer server that announces
//!   `Xfer-Upload-Protocol: 1` gets an [`Upload`], xfer's parallel upload protocol, every
//!   chunk checked on arrival and the whole file before it is stored; any other server
//!   (nginx, XRootD) gets the whole file as one plain `PUT` streamed from disk, its
//!   checksums compared with what the server declares (`plain_put`).
//!
//! The fields the caller passed with `TransferHeader<Name>` go on every request to the
//! remote's origin, never to another origin a redirect points at.
//!
//! Every connection a copy opens, to the remote and to any origin a redirect names, goes
//! through a [`CopyGuard`]: the [`RemotePolicy`] judges each resolved address before the
//! client connects to it. Failures reach the caller as a [`CopyFailed`] (fixed words); the
//! causes, peers and paths go to the log.

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use xfer_common::secret::Secret;
use xfer_core::checksum::ChecksumAlgorithm;
use xfer_core::get::{Download, GetConfig, GetError};
use xfer_core::progress::Progress;
use xfer_core::put::{PutConfig, PutError, Upload};
use xfer_core::transport::Transport;
use xfer_core::{Sha256Digest, TransferError};
use xfer_http::{AddressPolicy, ConnectionWatch};
use xfer_service::tpc::{
    CopyCredentials, CopyDirection, CopyFailed, CopyFailure, CopyJob, CopyOutcome,
    RemoteConnections, RemotePolicy, RunningCopy,
};
use xfer_service::CopyRunner;

use crate::{plain_put, transport_for, ClientConfig, LaneLayout};

/// How often a pull's engine counters are copied into the ones the markers read.
const MIRROR_EVERY: Duration = Duration::from_millis(200);

/// Runs copies with xfer's HTTP client and engine.
#[derive(Debug, Clone)]
pub struct EngineCopyRunner {
    /// How to reach remotes: TLS trust (the remote's CA), TCP tuning, protocol. The lanes a
    /// copy asks for (`X-Number-Of-Streams`) replace its lane layout.
    pub client: ClientConfig,
    /// Chunk size, retries and checks of pulls.
    pub get: GetConfig,
    /// Chunk size and retries of pushes.
    pub put: PutConfig,
    /// Which remotes copies may reach (`TpcConfig::remote_policy`).
    pub policy: RemotePolicy,
}

/// One copy's connection policy: the server's [`RemotePolicy`], whether it refused
/// anything, so that a copy that failed for it says so rather than "could not connect", and
/// the connections open now, for the markers' `RemoteConnections`.
#[derive(Debug)]
pub struct CopyGuard {
    policy: RemotePolicy,
    refused: AtomicBool,
    connections: RemoteConnections,
}

impl CopyGuard {
    pub fn new(policy: RemotePolicy) -> Self {
        Self {
            policy,
            refused: AtomicBool::new(false),
            connections: RemoteConnections::default(),
        }
    }

    /// The connections of this copy that are open now.
    pub fn connections(&self) -> &RemoteConnections {
        &self.connections
    }

    /// Whether a connection of this copy was refused.
    pub fn refused(&self) -> bool {
        self.refused.load(Ordering::Relaxed)
    }
}

impl AddressPolicy for CopyGuard {
    fn check(&self, host: &str, addr: SocketAddr) -> Result<(), String> {
        self.policy.check(host, addr.ip()).map_err(|why| {
            self.refused.store(true, Ordering::Relaxed);
            format!("{addr} is {why}: not allowed by the server's copy policy (--tpc-allow)")
        })
    }

    fn connected(&self, addr: SocketAddr) -> Option<ConnectionWatch> {
        Some(Box::new(self.connections.opened(addr)))
    }
}

impl EngineCopyRunner {
    pub fn new(client: ClientConfig) -> Self {
        Self {
            client,
            get: GetConfig::default(),
            put: PutConfig::default(),
            policy: RemotePolicy::default(),
        }
    }

    fn client_for(&self, job: &CopyJob, guard: &Arc<CopyGuard>) -> ClientConfig {
        let mut client = self.client.clone();
        client.http.address_policy = Some(Arc::clone(guard) as Arc<dyn AddressPolicy>);
        client.http.extra_headers = job
            .headers
            .iter()
            .map(|(n, v)| (n.clone(), Secret::new(v.clone())))
            .collect();
        if job.credentials == CopyCredentials::None {
            // `Credential: none`: the remote sees the caller's TransferHeader fields only.
            client.http.tls.client_identity = None;
            client.quic.tls.client_identity = None;
        }
        if let Some(n) = job.lanes {
            client = client.with_lanes(LaneLayout {
                connections: Some(n),
                streams_per_connection: None,
            });
        }
        client
    }
}

impl CopyRunner for EngineCopyRunner {
    fn schemes(&self) -> &[&str] {
        &["https", "http"]
    }

    fn start(&self, job: CopyJob) -> RunningCopy {
        let guard = Arc::new(CopyGuard::new(self.policy.clone()));
        let client = self.client_for(&job, &guard);
        let CopyJob {
            direction,
            stop,
            verify_checksum,
            ..
        } = job;
        let url = match &direction {
            CopyDirection::Pull { url, .. } | CopyDirection::Push { url, .. } => url.clone(),
        };
        let transport = match transport_for(&url, &client) {
            Ok(t) => t,
            Err(e) => return failed(failure_of_transfer(&e)),
        };
        let progress = Progress::new();
        let done: Pin<Box<dyn Future<Output = Result<CopyOutcome, CopyFailure>> + Send>> =
            match direction {
                CopyDirection::Pull { url, into } => {
                    let get = GetConfig {
                        overwrite: false,
                        ..self.get.clone()
                    };
                    let pull = Pull {
                        transport,
                        url,
                        into,
                        get,
                        verify_checksum,
                    };
                    Box::pin(pull.run(progress.clone(), stop))
                }
                CopyDirection::Push { from, url } => {
                    let upload =
                        Upload::new(Arc::clone(&transport), from.clone(), url, self.put.clone());
                    let push = Push {
                        transport,
                        upload,
                        from,
                        put: self.put.clone(),
                        verify_checksum,
                    };
                    Box::pin(push.run(progress.clone(), stop))
                }
            };
        RunningCopy {
            progress,
            connections: guard.connections().clone(),
            done: Box::pin(async move {
                done.await.map_err(|mut f| {
                    // A refused address fails the copy as whatever the client made of it
                    // (a configuration error, lanes that never opened): name the reason
                    // instead. A status or a checksum stays what it is.
                    if guard.refused() && matches!(f.what, CopyFailed::Other | CopyFailed::Connect)
                    {
                        f.what = CopyFailed::NotAllowed;
                    }
                    f
                })
            }),
        }
    }
}

/// A pull and what it needs.
struct Pull {
    transport: Arc<dyn Transport>,
    url: String,
    into: PathBuf,
    get: GetConfig,
    verify_checksum: bool,
}

impl Pull {
    /// Fetch into the staging file. With `RequireChecksumVerification`, the source must
    /// give a whole-file checksum first: its `Repr-Digest` (SHA-256, checked as the bytes
    /// are hashed), else its adler32 answer to `Want-Digest` (what gfal2 and XRootD use),
    /// asked before any byte is fetched; neither fails the copy. A mismatch fails it; the
    /// core removes what was written.
    async fn run(
        self,
        shown: Progress,
        stop: Pin<Box<dyn Future<Output = ()> + Send>>,
    ) -> Result<CopyOutcome, CopyFailure> {
        let Pull {
            transport,
            url,
            into,
            mut get,
            verify_checksum,
        } = self;
        let mut known = None;
        if verify_checksum {
            let info = transport
                .stat()
                .await
                .map_err(|e| failure_of_transfer(&e))?;
            if info.sha256.is_some() {
                get.require_digest = true;
            } else {
                get.checksum = Some(ChecksumAlgorithm::Adler32);
            }
            tracing::info!(%url, repr_digest = info.sha256.is_some(), "checksum verification required");
            known = Some(info);
        }
        let mut download = Download::new(transport, url, into, get);
        if let Some(info) = known {
            download = download.with_known_remote(info);
        }
        let engine = download.progress();
        let report = mirrored(&engine, &shown, download.run_until(stop))
            .await
            // Bytes received, not verified: a chunk the remote served whole may still be in
            // the hasher when the next request's 401 ends the copy, and the token did work
            // for it.
            .map_err(|e| failure_of_get(&e).after_progress(engine.snapshot().received))?;
        Ok(CopyOutcome {
            sha256: report
                .sha256
                .as_deref()
                .and_then(|h| Sha256Digest::from_hex(h).ok()),
            bytes: report.size,
        })
    }
}

/// A push and what it needs.
struct Push {
    transport: Arc<dyn Transport>,
    upload: Upload,
    from: PathBuf,
    put: PutConfig,
    verify_checksum: bool,
}

impl Push {
    /// Push `from` to `url`: xfer's parallel upload protocol when the remote announces it
    /// (every chunk and the whole file checked by the destination before it stores it),
    /// otherwise the whole file in one plain `PUT` streamed from disk. Never guessed: a
    /// server that ignored `Content-Range` would store a chunk as the file.
    async fn run(
        self,
        progress: Progress,
        stop: Pin<Box<dyn Future<Output = ()> + Send>>,
    ) -> Result<CopyOutcome, CopyFailure> {
        let Push {
            transport,
            upload,
            from,
            put,
            verify_checksum,
        } = self;
        let mut lane = transport
            .open_lane(0)
            .await
            .map_err(|e| failure_of_transfer(&e))?;
        let parallel = lane
            .speaks_upload_protocol()
            .await
            .map_err(|e| failure_of_transfer(&e))?;
        tracing::info!(file = %from.display(), parallel, "pushing");
        if !parallel {
            let stored = plain_put::put_whole_file(
                &*transport,
                lane,
                &from,
                &put,
                &progress,
                verify_checksum,
                stop,
            )
            .await?;
            return Ok(CopyOutcome {
                sha256: Some(stored.sha256),
                bytes: stored.bytes,
            });
        }
        drop(lane);
        let engine = upload.progress();
        // Chunks count once the destination acknowledged them: a refusal after that is the
        // token expiring. (A plain PUT is one request: there is no "after".)
        let report = mirrored(&engine, &progress, upload.run_until(stop))
            .await
            .map_err(|e| failure_of_put(&e).after_progress(engine.snapshot().verified))?;
        Ok(CopyOutcome {
            sha256: Sha256Digest::from_hex(&report.sha256).ok(),
            bytes: report.size,
        })
    }
}

/// Run `work`, copying the engine's verified count into the one the markers read, which
/// exists before the engine does (a pull may ask the source first).
async fn mirrored<T>(engine: &Progress, shown: &Progress, work: impl Future<Output = T>) -> T {
    let mirror = || {
        let snap = engine.snapshot();
        shown.advance_to(snap.total, snap.verified);
    };
    tokio::pin!(work);
    let mut tick = tokio::time::interval(MIRROR_EVERY);
    let out = loop {
        tokio::select! {
            r = &mut work => break r,
            _ = tick.tick() => mirror(),
        }
    };
    mirror();
    out
}

/// A copy that could not even start.
fn failed(why: CopyFailure) -> RunningCopy {
    RunningCopy {
        progress: Progress::new(),
        connections: RemoteConnections::default(),
        done: Box::pin(async move { Err(why) }),
    }
}

/// What the caller may learn of a client error: refused, reset, timed out, no such name and
/// a peer that does not speak HTTP are one class, so that copies cannot map a network.
pub(crate) fn failed_transfer(e: &TransferError) -> CopyFailed {
    match e {
        TransferError::Connect { .. }
        | TransferError::Io { .. }
        | TransferError::Timeout { .. }
        | TransferError::Truncated { .. }
        | TransferError::Protocol { .. } => CopyFailed::Connect,
        TransferError::Tls { .. } => CopyFailed::Tls,
        TransferError::Status { status, .. } => CopyFailed::Status(*status),
        TransferError::Unexpected { .. } | TransferError::RangesIgnored { .. } => {
            CopyFailed::Protocol
        }
        TransferError::RemoteChanged { .. } => CopyFailed::RemoteChanged,
        TransferError::NotExpectedDigest { .. } => CopyFailed::ChecksumMismatch,
        _ => CopyFailed::Other,
    }
}

pub(crate) fn failure_of_transfer(e: &TransferError) -> CopyFailure {
    CopyFailure::new(failed_transfer(e), xfer_core::error::error_chain(e))
}

fn failure_of_get(e: &GetError) -> CopyFailure {
    let what = match e {
        GetError::Stat { source, .. }
        | GetError::Chunk { source, .. }
        | GetError::ServerChecksum { source, .. } => failed_transfer(source),
        // Retries ran out: the remote kept failing; its last error is only text here.
        GetError::Schedule { .. } => CopyFailed::Connect,
        GetError::WholeDigestMismatch { .. } | GetError::ChecksumMismatch { .. } => {
            CopyFailed::ChecksumMismatch
        }
        GetError::NoServerChecksum { .. } | GetError::Unverified { .. } => CopyFailed::NoChecksum,
        GetError::ImplausibleSize { .. } => CopyFailed::Protocol,
        GetError::Journal(_)
        | GetError::Io { .. }
        | GetError::Write(_)
        | GetError::NoRoom { .. }
        | GetError::DestinationExists { .. }
        | GetError::DestinationNotAFile { .. } => CopyFailed::Local,
        GetError::Interrupted => CopyFailed::Stopped,
        _ => CopyFailed::Other,
    };
    CopyFailure::new(what, xfer_core::error::error_chain(e))
}

fn failure_of_put(e: &PutError) -> CopyFailure {
    let what = match e {
        PutError::Local { .. } => CopyFailed::Local,
        PutError::Changed { .. } => CopyFailed::LocalChanged,
        PutError::Chunk { source, .. } | PutError::Remote { source, .. } => failed_transfer(source),
        PutError::Interrupted => CopyFailed::Stopped,
        _ => CopyFailed::Other,
    };
    CopyFailure::new(what, xfer_core::error::error_chain(e))
}

/// A [`xfer_service::Tpc`] over [`EngineCopyRunner`], with the config's remote policy.
pub fn engine_tpc(client: ClientConfig, config: xfer_service::TpcConfig) -> xfer_service::Tpc {
    let runner = EngineCopyRunner {
        policy: config.remote_policy.clone(),
        ..EngineCopyRunner::new(client)
    };
    xfer_service::Tpc::new(Arc::new(runner), config)
}

#[cfg(test)]
mod tests {
    use super::*;
    use xfer_common::tls::{ClientIdentity, ClientTlsOptions};

    fn job(credentials: CopyCredentials) -> CopyJob {
        CopyJob {
            direction: CopyDirection::Pull {
                url: "https://remote.example/x".into(),
                into: PathBuf::from("/nonexistent/staging"),
            },
            headers: vec![("Authorization".into(), "Bearer for-the-remote".into())],
            lanes: None,
            verify_checksum: false,
            credentials,
            stop: Box::pin(std::future::pending()),
        }
    }

    #[test]
    fn credential_none_leaves_only_the_transfer_headers() {
        let identity = ClientIdentity {
            cert: "/etc/xfer/host.pem".into(),
            key: "/etc/xfer/host.key".into(),
        };
        let runner = EngineCopyRunner::new(ClientConfig::default().with_tls(ClientTlsOptions {
            client_identity: Some(identity.clone()),
            ..Default::default()
        }));
        let guard = Arc::new(CopyGuard::new(RemotePolicy::default()));
        let server = runner.client_for(&job(CopyCredentials::Server), &guard);
        assert_eq!(server.http.tls.client_identity, Some(identity));
        let none = runner.client_for(&job(CopyCredentials::None), &guard);
        assert_eq!(none.http.tls.client_identity, None);
        assert_eq!(none.quic.tls.client_identity, None);
        let names: Vec<&str> = none
            .http
            .extra_headers
            .iter()
            .map(|(n, _)| n.as_str())
            .collect();
        assert_eq!(
            names,
            ["Authorization"],
            "the TransferHeader fields still go"
        );
    }
}

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

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;

use xfer_common::secret::Secret;
use xfer_core::get::{Download, GetConfig};
use xfer_core::progress::Progress;
use xfer_core::put::{PutConfig, Upload};
use xfer_core::transport::Transport;
use xfer_core::Sha256Digest;
use xfer_service::tpc::{CopyDirection, CopyJob, CopyOutcome, RunningCopy};
use xfer_service::CopyRunner;

use crate::{plain_put, transport_for, ClientConfig, LaneLayout};

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
}

impl EngineCopyRunner {
    pub fn new(client: ClientConfig) -> Self {
        Self {
            client,
            get: GetConfig::default(),
            put: PutConfig::default(),
        }
    }

    fn client_for(&self, job: &CopyJob) -> ClientConfig {
        let mut client = self.client.clone();
        client.http.extra_headers = job
            .headers
            .iter()
            .map(|(n, v)| (n.clone(), Secret::new(v.clone())))
            .collect();
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
        let client = self.client_for(&job);
        let CopyJob {
            direction, stop, ..
        } = job;
        match direction {
            CopyDirection::Pull { url, into } => {
                let transport = match transport_for(&url, &client) {
                    Ok(t) => t,
                    Err(e) => return failed(e.to_string()),
                };
                let get = GetConfig {
                    overwrite: false,
                    ..self.get.clone()
                };
                let download = Download::new(transport, url.clone(), into, get);
                let progress = download.progress();
                RunningCopy {
                    progress,
                    done: Box::pin(async move {
                        let report = download.run_until(stop).await.map_err(|e| chain(&e))?;
                        Ok(CopyOutcome {
                            sha256: report
                                .sha256
                                .as_deref()
                                .and_then(|h| Sha256Digest::from_hex(h).ok()),
                            bytes: report.size,
                        })
                    }),
                }
            }
            CopyDirection::Push { from, url } => {
                let transport = match transport_for(&url, &client) {
                    Ok(t) => t,
                    Err(e) => return failed(e.to_string()),
                };
                let upload = Upload::new(
                    Arc::clone(&transport),
                    from.clone(),
                    url.clone(),
                    self.put.clone(),
                );
                let progress = upload.progress();
                let put = self.put.clone();
                RunningCopy {
                    progress: progress.clone(),
                    done: Box::pin(push(transport, upload, from, put, progress, stop)),
                }
            }
        }
    }
}

/// Push `from` to `url`: xfer's parallel upload protocol when the remote announces it,
/// otherwise the whole file in one plain `PUT` streamed from disk. Never guessed: a server
/// that ignored `Content-Range` would store a chunk as the file.
async fn push(
    transport: Arc<dyn Transport>,
    upload: Upload,
    from: PathBuf,
    put: PutConfig,
    progress: Progress,
    stop: Pin<Box<dyn Future<Output = ()> + Send>>,
) -> Result<CopyOutcome, String> {
    let mut lane = transport.open_lane(0).await.map_err(|e| chain(&e))?;
    let parallel = lane.speaks_upload_protocol().await.map_err(|e| chain(&e))?;
    tracing::info!(file = %from.display(), parallel, "pushing");
    if !parallel {
        let stored =
            plain_put::put_whole_file(&*transport, lane, &from, &put, &progress, stop).await?;
        return Ok(CopyOutcome {
            sha256: Some(stored.sha256),
            bytes: stored.bytes,
        });
    }
    drop(lane);
    let report = upload.run_until(stop).await.map_err(|e| chain(&e))?;
    Ok(CopyOutcome {
        sha256: Sha256Digest::from_hex(&report.sha256).ok(),
        bytes: report.size,
    })
}

/// A copy that could not even start.
fn failed(why: String) -> RunningCopy {
    RunningCopy {
        progress: Progress::new(),
        done: Box::pin(async move { Err(why) }),
    }
}

/// An error with its causes, as one line: the `failure:` line is all the orchestrator sees.
pub(crate) fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

/// A [`xfer_service::Tpc`] over [`EngineCopyRunner`].
pub fn engine_tpc(client: ClientConfig, config: xfer_service::TpcConfig) -> xfer_service::Tpc {
    xfer_service::Tpc::new(Arc::new(EngineCopyRunner::new(client)), config)
}

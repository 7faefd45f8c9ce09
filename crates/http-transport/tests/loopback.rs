//! The one loopback server fixture of this suite: an [`HttpServer`] bound from a config,
//! serving on a task until [`Loopback::stop`] (or drop) tells it to end.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use xfer_http::server::{HttpServer, ServerConfig, ServerError};

/// How long a server may take to close its listener and drain once told to stop.
const STOP_WITHIN: Duration = Duration::from_secs(30);

/// A running server; dropping it tells the server to stop without waiting.
pub struct Loopback {
    pub addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl Loopback {
    /// Bind `cfg` (its `listen` is usually `127.0.0.1:0`) and serve on a task.
    pub async fn start(cfg: ServerConfig) -> Result<Self, ServerError> {
        let server = HttpServer::bind(cfg).await?;
        let addr = server.local_addr();
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(server.serve(async {
            let _ = rx.await;
        }));
        Ok(Self {
            addr,
            stop: Some(tx),
            task: Some(task),
        })
    }

    /// Tell the server to stop, without waiting: it closes its listener and lets the
    /// responses in flight finish. [`Loopback::stop`] then waits for it.
    pub fn signal_stop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }

    /// Stop serving and wait, within [`STOP_WITHIN`], until the server's task has ended (its
    /// listening socket closed). Panics naming the wait when it does not.
    pub async fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.task.take() {
            tokio::time::timeout(STOP_WITHIN, t)
                .await
                .expect("the server stops within 30 s")
                .expect("the server task ends without panicking");
        }
    }
}

impl Drop for Loopback {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

/// A config serving `root` on an ephemeral loopback port.
pub fn config(root: &std::path::Path) -> ServerConfig {
    let mut cfg = ServerConfig::new(root);
    cfg.listen = SocketAddr::from(([127, 0, 0, 1], 0));
    cfg
}

//! Ctrl-C, and a service manager's stop signal, as futures the process stops on.

/// Resolves on the first Ctrl-C (SIGINT). If the handler cannot be installed it never
/// resolves, and Ctrl-C falls back to killing the process, which every journal survives too.
pub async fn ctrl_c() {
    if tokio::signal::ctrl_c().await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Resolves on the first SIGINT or SIGTERM and names it. SIGTERM is what systemd, Docker and
/// Kubernetes send to stop a service, so a server that drained only on Ctrl-C would be cut
/// off mid-transfer by every service manager. A signal whose handler cannot be installed
/// keeps its default action (the process ends at once); the other still resolves this.
pub async fn stop_signal() -> &'static str {
    use tokio::signal::unix::{signal, SignalKind};
    let term = async {
        match signal(SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        () = ctrl_c() => "SIGINT",
        () = term => "SIGTERM",
    }
}

//! Ctrl-C as a future the transfers stop on.

/// Resolves on the first Ctrl-C (SIGINT). If the handler cannot be installed it never
/// resolves, and Ctrl-C falls back to killing the process, which every journal survives too.
pub async fn ctrl_c() {
    if tokio::signal::ctrl_c().await.is_err() {
        std::future::pending::<()>().await;
    }
}
